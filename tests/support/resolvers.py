"""A user resolver for the tests: concatenates both versions' v, keeps the larger n."""


def concat(publisher_row, subscriber_row, conflict_type):
    if publisher_row is None or subscriber_row is None:
        return "publisher"
    merged = dict(publisher_row)
    merged["v"] = f"{publisher_row['v']}+{subscriber_row['v']}"
    merged["n"] = max(publisher_row["n"] or 0, subscriber_row["n"] or 0)
    return merged
