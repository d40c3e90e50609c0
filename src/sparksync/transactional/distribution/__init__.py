"""The distributor: the distribution database, and the log reader that stores each publication's transactions in it."""
