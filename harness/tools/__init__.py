"""verl tools backed by the emulated (or real) sandboxes."""
