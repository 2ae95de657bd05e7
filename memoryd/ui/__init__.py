"""The local web viewer (`memoryd ui`): sessions, memories and what agents were given.

    data.py     what the pages show, through the daemon's own operations
    app.py      the Starlette application: routes, templates, the token and CSRF guard
    server.py   serving it on 127.0.0.1 (in the daemon, or in `memoryd ui` itself)
    templates/  the pages (Jinja2)
    static/     the stylesheet, the script and the icon

Nothing here is imported until someone opens the viewer.
"""
