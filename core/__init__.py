"""What every app shares. Not a Django app: it has no models."""
