package main

func cmdBench(c *cli, args []string) int {
	c.errorf("not yet")
	return exitFailed
}
