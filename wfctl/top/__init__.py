"""`wfctl top`'s data: the snapshot one refresh reads (``snapshot``) and the connection it
reads through (``source``). The live view that draws them is wfctl/cli/top_app.py."""
