"""sendgrid_safe."""
