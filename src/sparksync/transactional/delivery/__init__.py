"""The distribution agent: its Spark tasks, delivery to each subscription in commit batches, the commands applied at
the subscriber (call syntax, procedures, set-based batches)."""
