"""The anatomy explorer: a page for every component, activation and tensor of the model (`show`,
`explore`), and the code evidence behind each page (the lines of modeling_deepseek.py and config.json
that define and use it)."""
