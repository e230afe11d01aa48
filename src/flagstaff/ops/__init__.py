"""What an operator reads and what keeps a process lean: JSON logs, Prometheus metrics, and the
allocator setting that returns memory after bursts."""
