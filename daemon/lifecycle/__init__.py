"""What happens to sessions after their messages are stored: expiry and recovery."""
