"""The op jobs the sensors launch: each beside the op it runs."""
