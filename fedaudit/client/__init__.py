"""Client-side simulation: what a federated client computes and uploads (used by ``capture``)."""
