"""Making specialist adapters: distillation data, LoRA training on CPU, and evaluation.

- `distill.py` builds each specialist's training set from public prompts: the base model,
  prompted as a teacher (a long profile prompt, and constrained decoding for tool calls and
  UI), answers in batch on the project's own engine; the student input is the request as the
  specialist serves it (its short profile prompt), so the adapter learns to act as the teacher
  without the long prompt (context distillation).
- `lora_train.py` trains a PEFT LoRA on any Llama/Qwen2-family base the engine loads.
- `evaluate.py` measures, on held-out prompts, whether each adapter does its specialist's job
  better than the bare base.

Commands: `macaron adapters distill | train | eval`.
"""
