"""Framework-neutral code that the torch side and the MLX mirror both import, so that it
lives once: memory-model specs and maths (weight names, shapes, init rules, validation,
forward and inner gradient against array hooks), the chunk gates and coefficients, the
Newton-Schulz iteration, the memory layer's rules, attention visibility, the layers' and
blocks' construction and flows, and the sampling rules. Only array code and each backend's
initialisation are written twice (CONTRIBUTING.md, "The MLX mirror")."""
