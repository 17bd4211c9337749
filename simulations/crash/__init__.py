"""The crash simulators (docs/simulations.md); the wheel ships this folder as actors.simulate."""
