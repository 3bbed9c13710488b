"""Local runs of a GGUF under llama.cpp or ik_llama.cpp: the KV cache each build and file give, what sits
on each GPU and in RAM, the longest context that fits, the flags to pass, and the decode floor.

Modules point one way: `builds` (which build does what) -> `cache` (the KV cache it allocates) ->
`placement` (weights, cache and compute buffers per device) -> `floor` (the speed floor). They read a
GGUF listing (kimicount.gguf) and the model spec; none of them imports rich, torch or the hub client.
"""
