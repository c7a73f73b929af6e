"""The IWorld contract's implementations: the sandbox world."""
