"""A run's records and their files: what each column and field means."""
