print("ubiquityfs")
