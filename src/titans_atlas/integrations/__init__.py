"""Bridges to other ecosystems, each behind its own extra (``pip install "titans-atlas[hf]"``).

Nothing here is imported by ``import titans_atlas``: a bridge imports its dependency only when
it is imported itself (``import titans_atlas.integrations.hf``).
"""
