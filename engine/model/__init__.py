"""The Llama-family decoder the engine serves: config.py (from config.json), rope.py, llama.py (the
modules, one forward each), loader.py (config.json + safetensors from a local folder) and tokenizer.py."""
