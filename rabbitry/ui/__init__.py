"""The management page at /ui/ on a node's control API (docs/ui.md).

ManagementUI    serves the page, its JSON state and its actions (web.py)
Logins          one-time login tokens and browser sessions (login.py)
PageState       what the page shows, gathered within a time budget (state.py)
"""

from rabbitry.ui.login import Logins
from rabbitry.ui.state import PageState
from rabbitry.ui.web import ManagementUI

__all__ = ["Logins", "ManagementUI", "PageState"]
