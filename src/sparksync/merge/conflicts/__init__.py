"""Conflicts: what is logged, the resolvers, reading logged conflicts back and overriding them."""
