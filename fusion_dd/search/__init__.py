"""Pure search strategies: they ask an oracle about configurations and never run anything."""
