"""Chaos testing: virtual time, replayable fault schedules, and judges of client behaviour under faults."""
