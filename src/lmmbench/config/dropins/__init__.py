"""The drop-ins' command lines: vLLM's and SGLang's flag tables as data, their parsers and value checks."""
