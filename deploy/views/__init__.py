"""Deploy's pages: dedicated endpoints (deployments), model exports, the workspace's Models
page (list, try-it, delete), and the public model's try-it page. urls.py names each view by
its module."""
