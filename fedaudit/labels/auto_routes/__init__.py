"""``auto``'s routes, one family per module: each reads one kind of update (a one-step upload of a trained model, a
FedAvg delta with BN buffers, ...) and returns the counts of the method it trusts there, or None so that the next
route runs. fedaudit/labels/auto.py holds the order they run in; common.py the helpers they share (running a
method, the probe of the head, the result's diagnostics)."""
