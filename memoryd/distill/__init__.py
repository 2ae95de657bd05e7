"""Optional distillation: a model reads saved conversation segments and keeps the facts,
decisions, preferences and gotchas in them, as `observation` memories. Off by default.

    answer.py     the answer asked of the model (a strict schema) and its checks
    backlog.py    older sessions' saved segments queued when asked (`memoryd distill`)
    prompt.py     what is sent: one segment's rendered, masked messages, numbered
    providers.py  the models: OpenAI-compatible, Anthropic, the user's agent CLI
    worker.py     the background drain of the queue (`store.distill_queue`)

Capture, recovery and hooks never wait for any of it: a segment is queued when it is
saved, and the daemon drains the queue at a bounded rate within a daily token budget.
"""
