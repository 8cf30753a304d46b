"""What a user calls: the command line and its commands, check, the manual's generated pages, sample
data and job scripts."""
