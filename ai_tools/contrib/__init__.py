"""Optional integrations with host servers (imported only inside those hosts)."""
