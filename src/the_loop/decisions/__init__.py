"""The decision record: its layout, how it is built, masked, written and read back."""
