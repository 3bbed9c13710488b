"""How each serving engine sizes its KV-cache pool, as read from its code: what vLLM keeps back besides the
weights (`reserve`), and SGLang's rule of mem_fraction_static (`sglang`). `plan` reads them; they read
only the spec and the accelerator table (never `plan`), so imports point one way."""
