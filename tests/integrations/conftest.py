"""Fixtures for the integration tests (see hf_helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hf_helpers import train_on_sentence

from titans_atlas.tokenizers import ByteTokenizer


@pytest.fixture(scope="session")
def trained_dir(tmp_path_factory) -> Path:
    """Our model directory of the trained model (config, weights, byte tokenizer spec)."""
    directory = tmp_path_factory.mktemp("trained")
    model = train_on_sentence()
    model.save_pretrained(str(directory))
    ByteTokenizer().save(directory)
    return directory
