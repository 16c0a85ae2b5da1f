"""What the tests share: fixtures' machinery, local servers and stand-ins (imported, never collected)."""
