"""The domain: what memoryd does when asked, between the interfaces (the API, the CLI,
MCP, the hooks) and memory. Requests arrive typed; refusals are `errors.Refused`, which
each interface says in its own terms (the API as an HTTP status).

    requests.py    what each operation is asked (typed; the interfaces build these)
    core.py        what every part works over (`Core`), the runtime protocol, shared rules
    recaller.py    recall as every interface gets it (`Recaller`)
    blocks.py      what an agent is told: the start block (the briefing), the prompt block
    memories.py    recall, context blocks, remember, correct, forget, get
    governance.py  forgetting a user, retention, the raw archive, holds, project links
    session_events.py  the stored sessions and the hooks' events
    assembly.py    the parts over one core (`Domain`)
"""
