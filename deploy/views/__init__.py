"""Deploy's pages: dedicated endpoints (deployments), model exports, and a model's try-it page
(in its workspace, and a public model's). urls.py names each view by its module."""
