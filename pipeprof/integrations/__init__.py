"""Callbacks for trainers that run the loop themselves: Lightning (``integrations.lightning``), Hugging Face
(``integrations.hf``). Each imports its framework only when imported itself."""
