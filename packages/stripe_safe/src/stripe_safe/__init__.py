"""stripe_safe."""
