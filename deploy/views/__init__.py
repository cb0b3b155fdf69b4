"""Deploy's pages: dedicated endpoints (deployments), model exports, and the public model's
try-it page. urls.py names each view by its module."""
