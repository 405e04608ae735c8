"""What-if runs: request traces replayed through simulated instances on a virtual clock or
sent to a live server, their reports, and comparisons of two runs."""
