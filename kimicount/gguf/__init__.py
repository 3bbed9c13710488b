"""GGUF checkpoints (llama.cpp's format): read from their headers alone, checked against the anatomy,
and sized before a conversion.

- `reader`: a .gguf file, a split set (`…-00001-of-00009.gguf`) or Hub files → a `GGUFListing`.
- `layout`: llama.cpp's tensor names for arch `deepseek2` and `glm-dsa`, on the component tree; the spec
  that the file's `deepseek2.*` or `glm-dsa.*` metadata implies; the check of every tensor's shape.
- `quantize`: the listing a uniform `llama-quantize` to one type would write (an estimate).

Only these modules import the `gguf` package (llama.cpp's gguf-py), and only when a GGUF is read.
"""
