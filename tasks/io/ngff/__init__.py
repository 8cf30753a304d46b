"""The OME-NGFF model: metadata read and written, HCS plates, ROI tables, conformance with the official schemas and the readers users have."""
