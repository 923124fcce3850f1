"""The book's helpers: the interactive pieces: sliders, step-by-step views and explorers (ipywidgets)."""
