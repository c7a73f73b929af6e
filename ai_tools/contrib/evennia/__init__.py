"""Evennia contrib for ai_tools (imported only under Evennia)."""
