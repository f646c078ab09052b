"""The command line around Hydra: checks of the overrides and the installed extras before a
config composes, and the multirun callback."""
