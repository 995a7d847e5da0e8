"""Pure parsers for the text that NVIDIA and Linux tools print: text in, frozen dataclass out, never raising."""
