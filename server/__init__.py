"""The DICE Copilot language server (pygls)."""
