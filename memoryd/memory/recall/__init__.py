"""How memories are found and handed to an agent, shared by every backend.

    chunks.py       memories cut into search units
    words.py        the words a query and a text are matched on
    gate.py         relevance: how much of a query a text covers
    fusion.py       keyword and vector scores fused per chunk
    hybrid.py       hybrid recall's ranking, written once over each backend's channels
    ranking.py      relevance weighed with importance and age
    rerank.py       an optional cross-encoder's order
    per_session.py  a session's best evidence once, not each of its memories
    spoken_time.py  the time a query speaks of ("yesterday", "two weeks ago") as a span
    context.py      the `<memory_context>` block, with its one escaping step
"""
