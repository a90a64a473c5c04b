"""Framework-neutral code that the torch side and the MLX mirror both import, so that it
lives once: memory-model specs (weight names, shapes, init rules, validation) and the names
of the chunk gates and coefficients. Only array code is written twice (CONTRIBUTING.md,
"The MLX mirror")."""
