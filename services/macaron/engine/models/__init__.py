"""Model implementations the engine runs (Llama family: Llama, Mistral, Qwen2)."""
