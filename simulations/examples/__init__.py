"""Applications written the way docs/simulations.md asks, to run the crash simulators on."""
