"""Writes. Every change to users' workspaces goes through one of these modules: workspaces,
members, invitations, projects, keys."""
