"""Instrument and file readers: each turns what a microscope wrote into an Acquisition (planes, channels, positions) or a Volume."""
