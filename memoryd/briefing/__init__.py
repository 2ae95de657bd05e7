"""The project briefing: what a new session in a project is told.

Between the API (which asks for it at a session's start) and memory (whose digests,
facts and observations it reads): the project's state as an engineer who read every
session would write it, offline and exactly, from the sessions' digests.

    state.py   the state the digests leave: decisions, open items, files, failures, ending
    text.py    that state as the block's text, within a size
"""

from memoryd.briefing.state import ProjectState, project_state
from memoryd.briefing.text import Briefing, render

__all__ = ["Briefing", "ProjectState", "project_state", "render"]
