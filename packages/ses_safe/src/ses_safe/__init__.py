"""ses_safe."""
