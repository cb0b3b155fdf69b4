from deploy.inference.server import main

main()
