"""The seed API's path to the networks, `puffer.models.Default` and `puffer.models.NatureCNN`,
kept for scripts and configs written against it; the networks live in puffer.policies.networks."""

from puffer.policies.networks import Default, NatureCNN

__all__ = ["Default", "NatureCNN"]
