"""Exact leakage channels: what an update reveals in closed form, beside what attacks optimise for."""
