"""Workspace pages: the workspaces themselves, their members and invitations, their projects
and their API keys. urls.py names each view by its module."""
